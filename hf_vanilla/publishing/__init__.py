"""The publishing layer: model cards (:mod:`.card`), what of a run may be published (:mod:`.public`) and pushes to
the Hub (:mod:`.hub`). Above the core and the tasks; it never imports training."""
