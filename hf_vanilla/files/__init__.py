"""The files layer: atomic files and folders (:mod:`.atomic`) and an output folder's record of its own files and
its lock (:mod:`.output_folder`). It imports no model and nothing else of the package."""
