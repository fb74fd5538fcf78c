"""Campaigns: a plan of fits advanced in budgeted, resumable commands (lease after lease).

``python -m graphormer_sepnorm.campaign PLAN STATE_DIR --budget-s SECONDS`` (see
:mod:`~graphormer_sepnorm.campaign.runner`); plans in ``campaigns/*.yaml``
(:mod:`~graphormer_sepnorm.campaign.plan`); the state folder
(:mod:`~graphormer_sepnorm.campaign.state`); stopping in time and keeping the best models
(:mod:`~graphormer_sepnorm.campaign.budget`). Needs torch, lightning, torch-geometric,
torchmetrics and jsonargparse: no RDKit, no ogb (datasets come as prepared splits).
"""
