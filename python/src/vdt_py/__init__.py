"""vdt's Python side: the parts of the workflow that are not training, done with the libraries the field uses.

* ``prepare``  videos/frames + captions (+ semantic-id maps) -> a vdt data root (Wan2.2 VAE latents, umT5 text table)
* ``decode``   latents written by ``vdt sample`` -> mp4 videos and a contact-sheet PNG (Wan VAE)
* ``plot``     a run's train_log.csv / val_log.csv -> plot.png (matplotlib)
* ``tiny-models``  tiny random AutoencoderKLWan + umT5 (+ tokenizer) for tests and a CPU walk-through

``vdt data prepare`` and ``vdt decode`` run these through ``python -m vdt_py``.
"""

__version__ = "0.1.0"
