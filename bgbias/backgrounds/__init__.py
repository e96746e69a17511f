"""Background pools: photographs and generated images pasted behind objects (BGAugment, corrupted sets)."""
