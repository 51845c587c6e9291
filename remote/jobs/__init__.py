"""Jobs: detached processes the daemon supervises (or a job engine such as Slurm runs), their
logs, exit codes and events, started in the user's login environment. Other areas start and read
jobs through the daemon's job store (`daemon.jobs`) and may import the modules in PUBLIC."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("store", "engines", "input", "login_env")
