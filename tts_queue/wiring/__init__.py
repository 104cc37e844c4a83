"""The top layer of the core: the one wiring of its services (``wiring.Wiring``), which the API, the
workers and the shell extend. It may import every other layer; none imports it but the adapters
and the shell."""
