"""The reference pipeline's sample data and its demo: not a job (no declaration), so discovery passes it by.

    generator.py   the seeded clickstream: clicks and user profile versions, in log order
    produce.py     `kappa generate`: that stream, Avro-encoded, into `clicks` and `user_profiles`
    demo.py        `kappa demo`: a fresh stack, the generated stream, every job, a summary from Delta

The `kappa` command imports these lazily, inside the commands, as it imports the rest of jobs/.
"""
