"""The report contract between diagnose and render: the JSON document as types (``doc``, its schema generated from
them), every step field declared once (``columns``), the document built from an analysis (``build``), saved and
loaded (``io``), and the diff of two documents (``diff``)."""
