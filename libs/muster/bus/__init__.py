"""Kafka transport (aiokafka) and the embedded Tansu broker."""
