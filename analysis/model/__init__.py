"""Models: the catalogue of sources, hub downloads, the checks a folder passes, devices, and the loaded model."""
