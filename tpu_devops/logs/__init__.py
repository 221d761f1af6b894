"""Log sources, template mining, redaction, boot-log diagnosis and the Gemma analyst loop."""
