// tools library anchor: synthetic data (synth) and checkpoint inspection live here.
