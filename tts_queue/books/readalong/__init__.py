"""The read-along EPUB: built from the chapters' audio and captions, or from the uploaded EPUB's
own documents (sanitized, each spoken sentence marked) with media overlays."""
