"""Accuracy without Kafka: simulate a population, perturb, fold, estimate and score
(:mod:`~kvldp.evaluation.scoring`); predict a mechanism's error analytically
(:mod:`~kvldp.evaluation.prediction`); and rank mechanisms and estimators for a
deployment from those predictions (:mod:`~kvldp.evaluation.advisor`). ``kvldp evaluate``,
``kvldp advise`` and the papers' experiments are built on it.
"""
