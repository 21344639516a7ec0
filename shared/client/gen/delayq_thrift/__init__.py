__all__ = ['ttypes', 'constants', 'DelayScheduler']
