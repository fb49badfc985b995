"""Fleet runs: many models × every target as one matrix (`xc batch`), resumable from the run store, sharded for
CI, on this machine's worker pool or on Ray; the matrix's Markdown and HTML; the diff and gate of two matrices."""
