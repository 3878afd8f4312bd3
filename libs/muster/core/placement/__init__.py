"""Gang placement on existing nodes: topology, devices and sharing."""
