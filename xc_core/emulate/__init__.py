"""Emulators: numpy re-implementations of compiled-model runtimes that cannot execute on this host."""
