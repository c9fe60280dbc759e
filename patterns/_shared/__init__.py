"""What several pattern families use: the proof machinery that runs a side computation (``producers``) at the
lengths that can tell it apart (``sizes``), and the named checks and computations of more than one family
(``checks``)."""
