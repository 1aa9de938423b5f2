"""The control loop and the mechanism around every policy (bounds, stabilisation, rate cap,
exploration budget, fallback). Pure: no I/O, time comes in as an argument. Used by the daemon
in real time and by the simulator's evaluation in virtual time."""
