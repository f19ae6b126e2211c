"""Every function that reads private rows: the statistics (issue 82).

A statistic reads one batch of private records (the rows a :class:`~mmdsynth.engines.Source` read and checked, or
the records a subsampled step drew) and returns their **sums**, each record's part bounded by a rule applied to that
record alone; the privacy engine (:mod:`mmdsynth.privacy.engine`) adds the noise and records the release. Nothing
else in the package receives a batch, and every raw value is read by the per-value readers of :mod:`.values` (a pure
function of the column's declaration and that one value). Every test checks that the sums it runs in process (an
engine's pass over a source, the privacy engine's subsampled step) use a statistic defined here
(``tests/conftest.py``); ``tests/contract/test_structure.py`` fails when a module outside this folder unpacks a
batch, and when a column-wide parse appears outside the per-value readers.

- :mod:`.rows`: a batch's rows and weights (:class:`~.rows.Weighted`, :func:`~.rows.unweighted`); :mod:`.bounds`:
  each record's part bounded (:func:`~.bounds.bounded_rows`).
- :mod:`.values`: the per-value readers.
- :mod:`.embedding`: class sums of a feature map (every mean embedding), a feature block's sums (a subsampled step).
- :mod:`.tables`: rows checked, clique counts, the numeric sketch's counts, schema inference's counts, value kinds.
- :mod:`.persons`: rows per person (the counting pass, the histogram release).
- :mod:`.gradients`: DP-SGD's clipped per-record gradients, summed.

This folder imports only the package's lowest layers (errors, validation, the NTK kernels); the engines, the privacy
engine, the data and the methods import it.
"""
