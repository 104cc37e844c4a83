"""A book's sources: an upload's cheap checks, then parsing EPUB, plain text and Markdown into
chapters, and cutting chapters into sentences."""
