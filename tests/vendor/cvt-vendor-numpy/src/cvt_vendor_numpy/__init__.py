"""cvt-vendor-numpy: a test vendor distribution, written from docs/plugin-authors.md only."""
