"""SAM: similarity attention and similarity mining (Zheng et al.), docs/methods/sam.md."""
