"""Kafka Connect 4.4 distributed worker with the FileStream connectors (issue 18 item 4)."""
