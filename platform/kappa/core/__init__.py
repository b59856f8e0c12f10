"""The platform's foundation: settings, errors a user can act on, waiting for a condition."""
