"""Stands in for transformers' tests/exporters/test_export.py, which the sdist does not ship.

ModelTesterMixin inherits ExportTesterMixin, and transformers' GenerationTesterMixin (the real one, when
scripts/transformers_common.sh is given it) inherits ExportGenerateTesterMixin: without the real file their
torch.export tests do not run here (docs/deploying.md's torch.export section, run by tests/test_docs.py, exports
hf_vanilla's decoders); scripts/transformers_common.sh puts the real file here when given a transformers source tree.
"""


class ExportTesterMixin:
    """transformers' torch.export tests, absent from the sdist: no test runs from here."""


class ExportGenerateTesterMixin(ExportTesterMixin):
    """transformers' torch.export tests of generate(), absent from the sdist: no test runs from here."""
