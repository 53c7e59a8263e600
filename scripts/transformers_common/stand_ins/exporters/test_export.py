"""Stands in for transformers' tests/exporters/test_export.py, which the sdist does not ship.

ModelTesterMixin inherits ExportTesterMixin: without the real file its torch.export tests do not run here
(docs/deploying.md's torch.export section, run by tests/test_docs.py, exports hf_vanilla's decoders);
scripts/transformers_common.sh puts the real file here when given a transformers source tree.
"""


class ExportTesterMixin:
    """transformers' torch.export tests, absent from the sdist: no test runs from here."""
