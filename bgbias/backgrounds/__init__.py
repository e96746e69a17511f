"""Background pools: the photographs and generated images pasted behind objects (BGAugment, corrupted sets)."""
