"""Measuring a herd on the simulated cluster: the herd demo and its runs (`herd`), progress until every pod
is Ready (`progress`), the makespan model (`makespan`), and a staggering group judged from its pods'
states over time (`groupwatch`, `grouprun`)."""
