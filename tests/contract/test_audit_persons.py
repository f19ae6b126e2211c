"""`mmdsynth audit --mechanism person-release` (issue 48) and `person-marginals` (issue 80): the embedding release and
the measured marginals of a table whose privacy unit is a person, attacked with a canary person of 500 rows. Honest:
within the claim. The person reduction broken (every row weighing 1, the row-level sum): the canary moves the release
hundreds of sensitivities and the audit fails."""
import numpy as np
import pytest

from mmdsynth import audit as audit_module
from mmdsynth.audit import CANARY_ROWS, audit
from mmdsynth.engines import persons


PERSON_TARGETS = ["person-release", "database-release", "person-marginals", "person-selection"]


@pytest.mark.parametrize("mechanism", PERSON_TARGETS)
def test_the_person_audits_pass_an_honest_release(mechanism):
    r = audit(1.0, 1e-5, mechanism=mechanism, trials=100, n_records=20)   # passing needs no power
    assert r.passed and r.epsilon_lower <= 1.0
    low = 0.5 if mechanism.endswith("-release") else 1.0 - audit_module.GAP_TOLERANCE    # the others: the bound exactly
    assert low < r.canary_gap <= 1.0 + audit_module.GAP_TOLERANCE
    assert ("500 children" if mechanism == "database-release" else "500 rows") in r.description
    assert r.mechanism == mechanism


@pytest.mark.parametrize("mechanism", PERSON_TARGETS)
def test_the_person_audits_catch_rows_weighed_as_persons(mechanism, monkeypatch):
    """Issue 80: with the person weights removed the marginal counts moved 354 times their sensitivity, yet the
    embedding-only audit passed; the marginals have their own target now."""
    monkeypatch.setattr(persons, "person_weights", lambda codes, m: np.ones(len(codes)))
    r = audit(1.0, 1e-5, mechanism=mechanism, trials=100, n_records=20)
    assert not r.passed and not r.sensitivity_ok
    assert r.canary_gap > 0.3 * CANARY_ROWS
    if mechanism != "person-selection":     # one draw between two cliques whose scores both grow with the rows: the
        assert r.epsilon_lower > 1.0        # measured sensitivity (250 x) fails it, not the pick's 1 bit

