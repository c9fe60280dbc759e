"""Pattern files of the test plugin."""
