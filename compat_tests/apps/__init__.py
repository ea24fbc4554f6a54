"""Unmodified applications (issue 18 item 4), run by `make test-apps` (marker ``apps``)."""
