"""CSurF's inverted lists of contextualized surface forms, and the payload of encoded CSF bags they are built from."""
