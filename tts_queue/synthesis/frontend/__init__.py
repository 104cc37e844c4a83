"""The text frontend: a request's text to what will be said (``script``), through SSML, the
normalizer and its readings, rules and numbers, the language guess and the sentence splitter."""
