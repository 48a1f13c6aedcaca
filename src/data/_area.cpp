// area library: filled by later issues
