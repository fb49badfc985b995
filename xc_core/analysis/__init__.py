"""One module per analysis. Each takes IR graphs / outputs and returns plain data with its evidence kind."""
