"""stagger shared core: policy file, selectors, grouping, pacers, throttles, kube helpers."""
