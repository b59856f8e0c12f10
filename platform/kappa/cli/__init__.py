"""`kappa`: the platform's command line."""
