"""A book's audio: chapters assembled from their sentences (stitched, captioned, word-timed) and
the whole book as an M4B."""
