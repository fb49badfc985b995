"""xc's extension for Google's Model Explorer: `model-explorer --extensions=xc_model_explorer` imports
`xc_model_explorer.main`, whose adapter and node-data provider call xc_core.explorer (where the logic is)."""
