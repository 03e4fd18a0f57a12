"""Test stand-in for the official cube3d package (see ../README.md): not the official code."""
