"""Reporting: the paper's tables, paired comparisons, figures and the analysis of trained models."""
