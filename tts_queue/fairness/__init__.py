"""Fair shares of every shared capacity: the model's time between tenants' sentences (``queueing``),
a worker's threads (``threads``) and the API's and webhooks' slots (``slots``). Standard library only."""
