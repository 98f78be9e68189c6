"""The reconcilers that release held pods as their group's pacer allows: the shared release loop
(`releasing`), gate mode's (`gates`: remove the scheduling gate) and evict mode's (`evictions`: evict the
held pod, its owner makes a replacement that is let through against its place)."""
