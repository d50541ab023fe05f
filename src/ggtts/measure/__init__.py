"""Built-in measurement: intelligibility (`ggtts eval`), speed against peers (`ggtts bench`), parity."""
