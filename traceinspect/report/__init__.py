"""The report contract between diagnose and render: the JSON document (``build``) and the diff of two (``diff``)."""
