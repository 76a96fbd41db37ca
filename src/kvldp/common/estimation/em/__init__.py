"""Count-based maximum likelihood (docs/mechanisms.md, *Count EM*), vectorised over independent groups.

Every mechanism whose report is one symbol of a finite alphabet has a likelihood
``P[z | x]`` (J outputs x K latent inputs). The per-user EM of the papers depends on a
user only through its output symbol, so EM needs just the histogram of outputs — the
aggregator's statistics. Keys are independent problems with the same (or per-key) P;
they are solved together as the rows of one array, each stopping on its own criterion,
exactly as if run one by one.

Why :func:`em_counts` does not simply iterate EM. EM converges linearly at the rate of
the fraction of missing information, which under LDP noise is close to 1; and where the
MLE lies on the boundary of the simplex (typical for keys whose linear solution is
negative) the vanishing states decay only geometrically, at a rate that tends to 1 as
the gradient gap closes. At d = 1,000 keys most mechanisms hit the 10,000-iteration cap.
The log-likelihood L(theta) = sum_z c_z ln (P theta)_z is concave, so its maximiser over
the simplex is characterised by the KKT conditions and can be found by Newton's method
on the active face instead (:func:`~kvldp.common.estimation.em.newton.active_set_newton`, typically
4-12 iterations). (SQUAREM, the usual EM accelerator, was measured too: at d = 1,000 it
still hit the cap for PCKV-GRR and PrivKVM, and where it stopped it was up to 1e-4 from
the MLE.) That maximiser is EM's fixed point whenever it is unique. When it is not (a
rank-deficient model such as PrivKV's four-state ``em4``, or too few distinct outputs)
plain EM's limit depends on its path from the start point, so those groups are re-run
with plain EM from ``theta0``, and the function keeps returning exactly what EM
converges to (docs/mechanisms.md, *EM by active-set Newton*).

The package's modules, one idea each:

* :mod:`~kvldp.common.estimation.em.solve` — :func:`em_counts`, the solver mechanisms call;
* :mod:`~kvldp.common.estimation.em.newton` — its fast path, safeguarded active-set Newton;
* :mod:`~kvldp.common.estimation.em.plain` — its fallback, plain EM, for groups whose answer is
  EM's path;
* :mod:`~kvldp.common.estimation.em.likelihood` — the count model both methods share;
* :mod:`~kvldp.common.estimation.em.options` — the options every ``em`` estimator accepts.

The likelihoods ``P`` themselves are built by the mechanisms; this package knows none.
This module defines the package's public API.
"""

from kvldp.common.estimation.em.options import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    EMOptions,
    parse_em_options,
    warm_start,
)
from kvldp.common.estimation.em.solve import WARM_NEWTON_ITER, EMResult, em_counts

__all__ = [
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "WARM_NEWTON_ITER",
    "EMOptions",
    "EMResult",
    "em_counts",
    "parse_em_options",
    "warm_start",
]
