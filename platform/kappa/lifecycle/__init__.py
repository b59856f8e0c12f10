"""Job versions over time: deployments on this machine, the job host, the replay protocol."""
