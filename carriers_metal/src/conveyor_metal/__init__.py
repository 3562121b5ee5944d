"""conveyor-metal: the Metal carrier, Apple GPU kernels written in TileLang."""
