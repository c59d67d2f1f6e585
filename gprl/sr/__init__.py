"""Symbolic regression and classification: objectives, scaling, estimators, datasets, model export."""
