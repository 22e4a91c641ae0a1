"""fast: the production lazy-tensor package (exports are filled in by engine work)."""
