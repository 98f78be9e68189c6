"""Tests of the command line (`python -m sim ...`): options, help, and each command run end to end."""
