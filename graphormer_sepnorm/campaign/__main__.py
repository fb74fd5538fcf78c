"""``python -m graphormer_sepnorm.campaign``: see :mod:`graphormer_sepnorm.campaign.runner`."""

import sys

from graphormer_sepnorm.campaign.runner import main

sys.exit(main())
