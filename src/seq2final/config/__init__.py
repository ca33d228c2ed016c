"""Configuration: the run parameters' schemas and every check done before any work."""
