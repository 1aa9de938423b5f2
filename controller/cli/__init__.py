"""specctl, the operator's command line: a client of the daemon's control socket (and of the
database when the daemon is down), plus the simulator's front end."""
