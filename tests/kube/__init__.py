"""stagger.kube and stagger.informer against the API emulator."""
