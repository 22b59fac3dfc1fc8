"""Tables and figures of the paper, rendered from configuration and results."""
