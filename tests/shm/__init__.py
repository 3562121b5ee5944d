"""Tests of conveyor-shm, the shared-memory example vendor carrier."""
